//! Logins through the engine: tokens verify until they expire or are revoked, survive a
//! reopen of the file, and are stored only as hashes.

use mindlite::{Config, Engine, ErrorKind};

fn config(lifetime_secs: u64) -> Config {
    let mut config = Config::default();
    config.auth.username = "admin".into();
    config.auth.password = "secret".into();
    config.auth.token_lifetime_secs = lifetime_secs;
    config
}

#[test]
fn a_token_verifies_until_logout() {
    let engine = Engine::open_in_memory(config(3600)).unwrap();
    assert!(engine.auth_required());
    let login = engine
        .block_on(engine.login(Some("admin"), Some("secret")))
        .unwrap();
    assert!(login.token.starts_with("pat_"), "{}", login.token);
    assert_eq!(
        login.token.len(),
        4 + 43,
        "32 random bytes in URL-safe base64"
    );
    engine.verify_token(&login.token).unwrap();
    assert!(engine.block_on(engine.logout(&login.token)).unwrap());
    let err = engine.verify_token(&login.token).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    assert!(!engine.block_on(engine.logout(&login.token)).unwrap());
}

#[test]
fn every_login_gets_a_different_token() {
    let engine = Engine::open_in_memory(config(3600)).unwrap();
    let a = engine
        .block_on(engine.login(Some("admin"), Some("secret")))
        .unwrap();
    let b = engine
        .block_on(engine.login(Some("admin"), Some("secret")))
        .unwrap();
    assert_ne!(a.token, b.token);
    engine.verify_token(&a.token).unwrap();
    engine.verify_token(&b.token).unwrap();
}

#[test]
fn wrong_or_missing_credentials_are_refused_by_kind() {
    let engine = Engine::open_in_memory(config(3600)).unwrap();
    let wrong = engine
        .block_on(engine.login(Some("admin"), Some("nope")))
        .unwrap_err();
    assert_eq!(wrong.kind(), ErrorKind::Unauthorized);
    let empty = engine
        .block_on(engine.login(Some("admin"), Some("")))
        .unwrap_err();
    assert_eq!(empty.kind(), ErrorKind::InvalidInput);
    let unknown = engine.verify_token("pat_nosuch").unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::Unauthorized);
}

#[test]
fn an_expired_token_is_refused() {
    let engine = Engine::open_in_memory(config(1)).unwrap();
    let login = engine
        .block_on(engine.login(Some("admin"), Some("secret")))
        .unwrap();
    engine.verify_token(&login.token).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let err = engine.verify_token(&login.token).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
}

#[test]
fn tokens_survive_a_reopen_and_only_their_hash_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.redb");
    let token = {
        let engine = Engine::open(&path, config(3600)).unwrap();
        engine
            .block_on(engine.login(Some("admin"), Some("secret")))
            .unwrap()
            .token
    };
    let bytes = std::fs::read(&path).unwrap();
    let secret = token.strip_prefix("pat_").unwrap().as_bytes();
    assert!(
        !bytes.windows(secret.len()).any(|w| w == secret),
        "the token text must not be in the file"
    );
    let engine = Engine::open(&path, config(3600)).unwrap();
    engine.verify_token(&token).unwrap();
}

#[test]
fn without_credentials_configured_auth_is_off_and_login_fails() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    assert!(!engine.auth_required());
    let status = engine.status(false);
    assert!(!status.auth.http_auth_enabled);
    assert!(
        status.auth.confirmed,
        "with logins off every caller is confirmed"
    );
    let err = engine
        .block_on(engine.login(Some("mindsdb"), Some("x")))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
}

#[test]
fn status_confirms_only_callers_with_a_token_when_auth_is_on() {
    let engine = Engine::open_in_memory(config(3600)).unwrap();
    let anonymous = engine.status(false);
    assert!(anonymous.auth.http_auth_enabled);
    assert_eq!(anonymous.auth.provider, "local");
    assert!(!anonymous.auth.confirmed);
    assert!(engine.status(true).auth.confirmed);
}
