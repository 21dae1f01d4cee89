//! Logins: checks the configured username and password in constant time, issues random bearer
//! tokens, and keeps only their SHA-256 hashes with the owner and expiry in the redb table
//! `auth_tokens`, so sessions survive a restart and a copied file reveals no live token.

use base64::Engine as _;
use redb::{ReadTransaction, ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::catalog::challenge::Verifier;
use crate::config::{AuthConfig, Edition};
use crate::error::{Error, ErrorKind, Result};
use crate::store::schema::TOKENS;
use crate::tenant::TenantId;

/// Random bytes per token: 256 bits, well above the 128 a guess would have to beat.
const TOKEN_BYTES: usize = 32;

/// MindsDB's message for a login with missing, empty or non-string fields.
const MALFORMED_LOGIN: &str = "Username and password should be string";
const BAD_CREDENTIALS: &str = "Invalid username or password";
const UNAUTHORIZED: &str = "Authorization is required to complete the request";

/// Creates the token table in a new file.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(TOKENS)?;
    Ok(())
}

/// Whether requests must carry a token: always in the hosted edition, and in the local edition
/// when its credentials are enabled.
pub(crate) fn required(edition: Edition, credentials: &Credentials) -> bool {
    edition == Edition::Hosted || credentials.enabled
}

/// The local edition's login as it stands: the config file's `[auth]`, or what
/// `PUT /api/config` set at run time (kept in the file by `catalog::settings`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Credentials {
    /// Whether requests must log in (MindsDB's `http_auth_enabled`).
    pub(crate) enabled: bool,
    /// The one username that logs in.
    pub(crate) username: String,
    /// Its password.
    pub(crate) password: Password,
}

/// A password as it is kept: the config file's as written, one set at run time only salted
/// and hashed, so the database file does not hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum Password {
    /// As the config file gives it (empty: none, so no login succeeds).
    Plain(String),
    /// SHA-256 of a random salt followed by the password, both in hex, and what checks a
    /// MySQL client's scrambled password (none for one set before MySQL logins were served).
    Salted {
        salt: String,
        sha256: String,
        #[serde(default)]
        verifier: Option<Verifier>,
    },
}

impl Credentials {
    /// The config file's credentials: enabled when both a username and a password are set.
    pub(crate) fn configured(auth: &AuthConfig) -> Credentials {
        Credentials {
            enabled: !auth.username.is_empty() && !auth.password.is_empty(),
            username: auth.username.clone(),
            password: Password::Plain(auth.password.clone()),
        }
    }
}

impl Password {
    /// `password` salted with fresh random bytes and hashed.
    pub(crate) fn salted(password: &str) -> Result<Password> {
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt)
            .map_err(|e| Error::internal(format!("no randomness for a password's salt: {e}")))?;
        let salt = hex(&salt);
        let sha256 = hex(&salted_hash(&salt, password));
        Ok(Password::Salted {
            salt,
            sha256,
            verifier: Some(Verifier::of(password)),
        })
    }

    /// Whether a password is set at all.
    pub(crate) fn is_set(&self) -> bool {
        match self {
            Password::Plain(text) => !text.is_empty(),
            Password::Salted { .. } => true,
        }
    }

    /// Whether `given` is this password, compared in constant time.
    fn matches(&self, given: &str) -> bool {
        match self {
            Password::Plain(expected) => constant_time_eq(given, expected) & !expected.is_empty(),
            Password::Salted { salt, sha256, .. } => {
                let given = hex(&salted_hash(salt, given));
                constant_time_eq(&given, sha256)
            }
        }
    }

    /// What checks a MySQL client's scrambled password; `None` when there is none to check
    /// (no password, or one set at run time before MySQL logins were served).
    fn verifier(&self) -> Option<Verifier> {
        match self {
            Password::Plain(text) if text.is_empty() => None,
            Password::Plain(text) => Some(Verifier::of(text)),
            Password::Salted { verifier, .. } => verifier.clone(),
        }
    }
}

/// Checks a MySQL client's login against the local edition's credentials: `answer` is the
/// password scrambled with `nonce` (see `challenge`). A mismatch is
/// [`ErrorKind::Unauthorized`], as is a password set at run time by a build that kept no
/// verifier for it (set it again).
pub(crate) fn check_scrambled(
    auth: &Credentials,
    username: &str,
    nonce: &[u8],
    answer: &[u8],
) -> Result<()> {
    let user_ok = constant_time_eq(username, &auth.username);
    let Some(verifier) = auth.password.verifier() else {
        return Err(Error::new(
            ErrorKind::Unauthorized,
            "The password was set at run time by an older build, which kept nothing to check a MySQL login with; set it again (PUT /api/config)",
        ));
    };
    if user_ok & verifier.accepts(nonce, answer) {
        Ok(())
    } else {
        Err(Error::new(ErrorKind::Unauthorized, BAD_CREDENTIALS))
    }
}

fn salted_hash(salt: &str, password: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(salt.as_bytes());
    hasher.update(password.as_bytes());
    hasher.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A freshly issued login token. The text exists only here and in the caller's hands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginToken {
    /// The bearer token, `pat_` followed by 43 URL-safe base64 characters.
    pub token: String,
    /// When it stops being accepted, in Unix seconds.
    pub expires_at: u64,
}

/// Checks credentials against the local edition's. Missing or empty fields are
/// [`ErrorKind::InvalidInput`]; a mismatch (or a server without credentials configured, as
/// MindsDB's default empty password never matches) is [`ErrorKind::Unauthorized`].
pub(crate) fn check_credentials(
    auth: &Credentials,
    username: Option<&str>,
    password: Option<&str>,
) -> Result<()> {
    let (Some(username), Some(password)) = (username, password) else {
        return Err(Error::invalid(MALFORMED_LOGIN));
    };
    if username.is_empty() || password.is_empty() {
        return Err(Error::invalid(MALFORMED_LOGIN));
    }
    // Both sides are compared in full, whatever matches first, so timing tells nothing.
    let user_ok = constant_time_eq(username, &auth.username);
    let password_ok = auth.password.matches(password);
    if user_ok & password_ok {
        Ok(())
    } else {
        Err(Error::new(ErrorKind::Unauthorized, BAD_CREDENTIALS))
    }
}

/// Issues a token for `tenant` valid for `lifetime_secs`, and drops tokens that have expired.
pub(crate) fn issue(
    txn: &WriteTransaction,
    tenant: TenantId,
    lifetime_secs: u64,
) -> Result<LoginToken> {
    let mut secret = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut secret)
        .map_err(|e| Error::internal(format!("no randomness for a login token: {e}")))?;
    let token = format!(
        "pat_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
    );
    let now = now_secs();
    let expires_at = now.saturating_add(lifetime_secs);
    let mut table = txn.open_table(TOKENS)?;
    table.retain(|_, (_, expiry)| expiry > now)?;
    table.insert(hash(&token).as_slice(), (tenant.0, expires_at))?;
    Ok(LoginToken { token, expires_at })
}

/// The tenant a live token belongs to; [`ErrorKind::Unauthorized`] for unknown, revoked or
/// expired tokens (one message for all, so a caller learns nothing about which).
pub(crate) fn verify(txn: &ReadTransaction, token: &str) -> Result<TenantId> {
    let table = txn.open_table(TOKENS)?;
    match table.get(hash(token).as_slice())? {
        Some(entry) => {
            let (tenant, expires_at) = entry.value();
            if now_secs() < expires_at {
                Ok(TenantId(tenant))
            } else {
                Err(unauthorized())
            }
        }
        None => Err(unauthorized()),
    }
}

/// Revokes a token; returns whether it was live.
pub(crate) fn revoke(txn: &WriteTransaction, token: &str) -> Result<bool> {
    let mut table = txn.open_table(TOKENS)?;
    let removed = table.remove(hash(token).as_slice())?;
    Ok(removed.is_some_and(|entry| now_secs() < entry.value().1))
}

/// Revokes every login token of `tenant` (its API key was revoked: sessions opened with it end).
pub(crate) fn revoke_tenant(txn: &WriteTransaction, tenant: TenantId) -> Result<()> {
    let mut table = txn.open_table(TOKENS)?;
    let mine: Vec<Vec<u8>> = table
        .iter()?
        .filter_map(|entry| entry.ok())
        .filter(|(_, value)| value.value().0 == tenant.0)
        .map(|(key, _)| key.value().to_vec())
        .collect();
    for key in mine {
        table.remove(key.as_slice())?;
    }
    Ok(())
}

/// The error for a request without valid credentials.
pub(crate) fn unauthorized() -> Error {
    Error::new(ErrorKind::Unauthorized, UNAUTHORIZED)
}

fn hash(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

/// Compares the hashes of both strings byte by byte without stopping early, so neither the
/// position of the first difference nor the configured length shows in the time taken.
fn constant_time_eq(given: &str, expected: &str) -> bool {
    let (a, b) = (hash(given), hash(expected));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configured() -> Credentials {
        Credentials::configured(&AuthConfig {
            username: "admin".into(),
            password: "secret".into(),
            ..AuthConfig::default()
        })
    }

    #[test]
    fn credentials_are_checked_as_mindsdb_does() {
        let auth = configured();
        assert!(check_credentials(&auth, Some("admin"), Some("secret")).is_ok());
        let wrong = check_credentials(&auth, Some("admin"), Some("nope")).unwrap_err();
        assert_eq!(wrong.kind(), ErrorKind::Unauthorized);
        assert_eq!(wrong.message(), "Invalid username or password");
        for (user, password) in [(None, Some("x")), (Some("admin"), Some("")), (None, None)] {
            let err = check_credentials(&auth, user, password).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput);
            assert_eq!(err.message(), "Username and password should be string");
        }
    }

    #[test]
    fn without_configured_credentials_no_login_succeeds() {
        let none = Credentials::configured(&AuthConfig::default());
        let err = check_credentials(&none, Some("mindsdb"), Some("x")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unauthorized);
    }

    #[test]
    fn a_salted_password_matches_only_itself_and_is_not_kept() {
        let password = Password::salted("s3cret").unwrap();
        let text = serde_json::to_string(&password).unwrap();
        assert!(!text.contains("s3cret"), "{text}");
        assert_ne!(
            Password::salted("s3cret").unwrap(),
            password,
            "a fresh salt each time"
        );
        let auth = Credentials {
            enabled: true,
            username: "u".into(),
            password,
        };
        assert!(check_credentials(&auth, Some("u"), Some("s3cret")).is_ok());
        assert!(check_credentials(&auth, Some("u"), Some("s3cret ")).is_err());
        assert!(check_credentials(&auth, Some("v"), Some("s3cret")).is_err());
    }

    #[test]
    fn auth_is_required_only_when_configured_or_hosted() {
        let none = Credentials::configured(&AuthConfig::default());
        assert!(!required(Edition::Local, &none));
        assert!(required(Edition::Local, &configured()));
        assert!(required(Edition::Hosted, &none));
    }
}
