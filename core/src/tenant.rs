//! Tenants: every catalog key starts with a [`TenantId`], so no query can name another tenant's
//! objects by construction. The local edition uses [`TenantId::LOCAL`].

use serde::{Deserialize, Serialize};

/// The owner of catalog objects (a user account in the hosted edition).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TenantId(pub u64);

impl TenantId {
    /// The one implicit tenant of the local edition.
    pub const LOCAL: TenantId = TenantId(0);
}
