//! Users of the hosted edition: each user is a tenant with a plan tier and API
//! keys. Owns the redb tables `users` (id → record), `user_names` (lower-cased name → id) and
//! `api_keys` (SHA-256 of a key → user and key id). A key's text exists only in the answer
//! that issued it; the file keeps its hash, so a copied file reveals no usable key.

use base64::Engine as _;
use redb::{ReadTransaction, ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::catalog::projects;
use crate::config::{Edition, HostedConfig};
use crate::error::{Error, ErrorKind, Result};
use crate::store;
use crate::store::schema::{API_KEYS, API_KEY_VERIFIERS, USERS, USER_NAMES};
use crate::tenant::TenantId;

/// Every API key starts so, which tells it from a login token (`pat_…`) at a glance.
pub const API_KEY_PREFIX: &str = "mlk_";

/// Random bytes per key: 256 bits.
const KEY_BYTES: usize = 32;

/// A user: one tenant of the hosted edition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// The user's id, which is also its tenant id; never reused.
    pub id: u64,
    /// The name as given (lookups ignore case).
    pub name: String,
    /// The plan tier, one of the config's `hosted.plans`.
    pub plan: String,
    /// A disabled user's keys and tokens are refused; its objects are kept.
    pub disabled: bool,
    /// Creation time, `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub created_at: String,
    /// The user's live API keys (without their text).
    pub api_keys: Vec<ApiKeyInfo>,
}

/// What is kept about an API key besides its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyInfo {
    /// The key's id, for revoking it.
    pub id: u64,
    /// The key's first characters, to recognise it by.
    pub prefix: String,
    /// Creation time.
    pub created_at: String,
}

/// A freshly issued API key: the only time its text is seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IssuedApiKey {
    /// The key's id.
    pub id: u64,
    /// The user it belongs to.
    pub user: String,
    /// The key itself: `mlk_` followed by 43 URL-safe base64 characters.
    pub key: String,
    /// Creation time.
    pub created_at: String,
}

impl User {
    /// The tenant this user is.
    pub fn tenant(&self) -> TenantId {
        TenantId(self.id)
    }
}

/// Creates the tables in a new file.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(USERS)?;
    txn.open_table(USER_NAMES)?;
    txn.open_table(API_KEYS)?;
    txn.open_table(API_KEY_VERIFIERS)?;
    Ok(())
}

/// Creates a user on `plan` (the default tier when `None`) with its own default project.
pub(crate) fn create(
    txn: &WriteTransaction,
    name: &str,
    plan: Option<&str>,
    hosted: &HostedConfig,
    default_project: &str,
) -> Result<User> {
    validate_name(name)?;
    let plan = plan.unwrap_or(&hosted.default_plan);
    check_plan(plan, hosted)?;
    let key = name.to_ascii_lowercase();
    let mut names = txn.open_table(USER_NAMES)?;
    if names.get(key.as_str())?.is_some() {
        return Err(Error::conflict(format!("User '{name}' already exists")));
    }
    let user = User {
        id: store::next_id(txn, "user")?,
        name: name.to_string(),
        plan: plan.to_string(),
        disabled: false,
        created_at: crate::time::now_text(),
        api_keys: Vec::new(),
    };
    names.insert(key.as_str(), user.id)?;
    put(txn, &user)?;
    projects::ensure_default(txn, user.tenant(), default_project)?;
    Ok(user)
}

/// Every user, by id (creation order).
pub(crate) fn list(txn: &ReadTransaction) -> Result<Vec<User>> {
    let table = txn.open_table(USERS)?;
    let mut users = Vec::new();
    for entry in table.iter()? {
        users.push(serde_json::from_str(entry?.1.value())?);
    }
    Ok(users)
}

/// One user by name (case-insensitive).
pub(crate) fn get(
    names: &impl ReadableTable<&'static str, u64>,
    users: &impl ReadableTable<u64, &'static str>,
    name: &str,
) -> Result<User> {
    let id = names
        .get(name.to_ascii_lowercase().as_str())?
        .map(|v| v.value())
        .ok_or_else(|| Error::not_found(format!("User '{name}' not found")))?;
    by_id(users, id)?.ok_or_else(|| Error::internal(format!("user '{name}' has no record")))
}

/// One user by name, read in `txn`.
pub(crate) fn read(txn: &ReadTransaction, name: &str) -> Result<User> {
    get(&txn.open_table(USER_NAMES)?, &txn.open_table(USERS)?, name)
}

fn get_mut(txn: &WriteTransaction, name: &str) -> Result<User> {
    get(&txn.open_table(USER_NAMES)?, &txn.open_table(USERS)?, name)
}

fn by_id(users: &impl ReadableTable<u64, &'static str>, id: u64) -> Result<Option<User>> {
    match users.get(id)? {
        Some(record) => Ok(Some(serde_json::from_str(record.value())?)),
        None => Ok(None),
    }
}

fn put(txn: &WriteTransaction, user: &User) -> Result<()> {
    txn.open_table(USERS)?
        .insert(user.id, serde_json::to_string(user)?.as_str())?;
    Ok(())
}

/// Changes a user's plan tier and/or whether it is disabled.
pub(crate) fn update(
    txn: &WriteTransaction,
    name: &str,
    plan: Option<&str>,
    disabled: Option<bool>,
    hosted: &HostedConfig,
) -> Result<User> {
    let mut user = get_mut(txn, name)?;
    if let Some(plan) = plan {
        check_plan(plan, hosted)?;
        user.plan = plan.to_string();
    }
    if let Some(disabled) = disabled {
        user.disabled = disabled;
    }
    put(txn, &user)?;
    Ok(user)
}

/// Issues a new API key for a user.
pub(crate) fn issue_key(txn: &WriteTransaction, name: &str) -> Result<IssuedApiKey> {
    let mut user = get_mut(txn, name)?;
    let mut secret = [0u8; KEY_BYTES];
    getrandom::fill(&mut secret)
        .map_err(|e| Error::internal(format!("no randomness for an API key: {e}")))?;
    let key = format!(
        "{API_KEY_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
    );
    let issued = IssuedApiKey {
        id: store::next_id(txn, "api_key")?,
        user: user.name.clone(),
        created_at: crate::time::now_text(),
        key,
    };
    txn.open_table(API_KEYS)?
        .insert(hash(&issued.key).as_slice(), (user.id, issued.id))?;
    crate::catalog::challenge::keep_key(txn, issued.id, &issued.key)?;
    user.api_keys.push(ApiKeyInfo {
        id: issued.id,
        prefix: issued.key[..API_KEY_PREFIX.len() + 4].to_string(),
        created_at: issued.created_at.clone(),
    });
    put(txn, &user)?;
    Ok(issued)
}

/// Revokes one of a user's API keys, and ends the user's login sessions (a token does not
/// record which key opened it, so all go); NotFound when the user has no key with that id.
pub(crate) fn revoke_key(txn: &WriteTransaction, name: &str, key_id: u64) -> Result<User> {
    let mut user = get_mut(txn, name)?;
    let before = user.api_keys.len();
    user.api_keys.retain(|k| k.id != key_id);
    if user.api_keys.len() == before {
        return Err(Error::not_found(format!(
            "User '{}' has no API key {key_id}",
            user.name
        )));
    }
    let mut keys = txn.open_table(API_KEYS)?;
    // Revocations are rare: a scan finds the hash without keeping it anywhere else.
    let hashes: Vec<Vec<u8>> = keys
        .iter()?
        .filter_map(|entry| entry.ok())
        .filter(|(_, owner)| owner.value() == (user.id, key_id))
        .map(|(hash, _)| hash.value().to_vec())
        .collect();
    for hash in hashes {
        keys.remove(hash.as_slice())?;
    }
    drop(keys);
    crate::catalog::challenge::forget_key(txn, key_id)?;
    crate::catalog::auth::revoke_tenant(txn, user.tenant())?;
    put(txn, &user)?;
    Ok(user)
}

/// The tenant `username` and `password` log in as. The local edition takes its credentials
/// (`local_login`: the config file's or those set at run time), and the login acts as `local`; the hosted edition takes a user's name
/// with one of its API keys as the password, and the login acts as that user. Missing or
/// empty fields are [`ErrorKind::InvalidInput`], wrong ones [`ErrorKind::Unauthorized`].
pub(crate) fn login(
    txn: &ReadTransaction,
    edition: Edition,
    local_login: &crate::catalog::auth::Credentials,
    local: TenantId,
    username: Option<&str>,
    password: Option<&str>,
) -> Result<TenantId> {
    if edition == Edition::Local {
        crate::catalog::auth::check_credentials(local_login, username, password)?;
        return Ok(local);
    }
    let (Some(username), Some(password)) = (username, password) else {
        return Err(Error::invalid("Username and password should be string"));
    };
    if username.is_empty() || password.is_empty() {
        return Err(Error::invalid("Username and password should be string"));
    }
    let wrong = || Error::new(ErrorKind::Unauthorized, "Invalid username or password");
    let user = match authenticate(txn, password) {
        Ok(user) => user,
        Err(e) if e.kind() == ErrorKind::Unauthorized => return Err(wrong()),
        Err(e) => return Err(e),
    };
    if !user.name.eq_ignore_ascii_case(username) {
        return Err(wrong());
    }
    Ok(user.tenant())
}

/// The tenant a MySQL client logs in as: [`login`]'s rules, with the password scrambled with
/// `nonce` (see `challenge`) instead of sent. In the hosted edition the password is one of
/// the user's API keys; a key issued before MySQL logins were served cannot be used so.
pub(crate) fn login_scrambled(
    txn: &ReadTransaction,
    edition: Edition,
    local_login: &crate::catalog::auth::Credentials,
    local: TenantId,
    username: &str,
    nonce: &[u8],
    answer: &[u8],
) -> Result<TenantId> {
    if edition == Edition::Local {
        crate::catalog::auth::check_scrambled(local_login, username, nonce, answer)?;
        return Ok(local);
    }
    let wrong = || Error::new(ErrorKind::Unauthorized, "Invalid username or password");
    let user = match read(txn, username) {
        Ok(user) => enabled(user)?,
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(wrong()),
        Err(e) => return Err(e),
    };
    let mut accepted = false;
    for key in &user.api_keys {
        if let Some(verifier) = crate::catalog::challenge::of_key(txn, key.id)? {
            accepted |= verifier.accepts(nonce, answer);
        }
    }
    if accepted {
        Ok(user.tenant())
    } else {
        Err(wrong())
    }
}

/// The user an API key belongs to. An unknown key is [`ErrorKind::Unauthorized`]; a disabled
/// user's key [`ErrorKind::Forbidden`].
pub(crate) fn authenticate(txn: &ReadTransaction, key: &str) -> Result<User> {
    let owner = txn
        .open_table(API_KEYS)?
        .get(hash(key).as_slice())?
        .map(|v| v.value().0);
    let user = match owner {
        Some(id) => by_id(&txn.open_table(USERS)?, id)?,
        None => None,
    };
    let user = user.ok_or_else(|| Error::new(ErrorKind::Unauthorized, "Invalid API key"))?;
    enabled(user)
}

/// The user that is `tenant`, refused when disabled; `None` for the local tenant and for
/// tenants that are not users.
pub(crate) fn active(txn: &ReadTransaction, tenant: TenantId) -> Result<Option<User>> {
    match by_id(&txn.open_table(USERS)?, tenant.0)? {
        Some(user) => enabled(user).map(Some),
        None => Ok(None),
    }
}

/// The plan tier of `tenant` (read from the `users` table); `None` when it is not a user (the
/// local tenant), which has no quotas.
pub(crate) fn plan_of(txn: &WriteTransaction, tenant: TenantId) -> Result<Option<String>> {
    Ok(by_id(&txn.open_table(USERS)?, tenant.0)?.map(|u| u.plan))
}

/// [`plan_of`] from a read snapshot (a disabled user keeps its plan).
pub(crate) fn plan_in(txn: &ReadTransaction, tenant: TenantId) -> Result<Option<String>> {
    Ok(by_id(&txn.open_table(USERS)?, tenant.0)?.map(|u| u.plan))
}

fn enabled(user: User) -> Result<User> {
    if user.disabled {
        return Err(Error::new(
            ErrorKind::Forbidden,
            format!("User '{}' is disabled", user.name),
        ));
    }
    Ok(user)
}

fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

fn check_plan(plan: &str, hosted: &HostedConfig) -> Result<()> {
    if hosted.plans.contains_key(plan) {
        return Ok(());
    }
    let known: Vec<&str> = hosted.plans.keys().map(String::as_str).collect();
    Err(Error::invalid(format!(
        "Unknown plan '{plan}'; the plans are: {}",
        known.join(", ")
    )))
}

/// Names are what people log in with: 1–64 letters, digits, `_`, `-`, `.` or `@`.
fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "Invalid user name '{name}': use 1 to 64 letters, digits, '_', '-', '.' or '@'"
        )))
    }
}
