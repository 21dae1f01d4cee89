//! Challenge–response logins, as MySQL clients make them: the server sends 20 random bytes
//! (the nonce), the client answers with its password scrambled with them, and the password
//! never crosses the wire. Two scrambles are in use: `mysql_native_password` (SHA-1, 20 bytes;
//! MariaDB's clients, PyMySQL and Connector/Python by default) and `caching_sha2_password`'s
//! fast path (SHA-256, 32 bytes; MySQL 8's clients by default).
//!
//! Checking an answer needs neither the password nor its salted hash, but a verifier: SHA1 of
//! SHA1 of the password, and SHA256 of SHA256 of it. Those are kept beside the salted hash of a
//! password set at run time and beside each API key (in `API_KEY_VERIFIERS`, keyed by the key's
//! id), made when the secret is made. They are unsalted, as MySQL's own are: for an API key (256
//! random bits) that costs nothing; for a human password it makes a copied file easier to
//! attack than the salted hash alone, which `docs/mysql.md` says.

use redb::{ReadTransaction, TableError, WriteTransaction};
use serde::{Deserialize, Serialize};
use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::store::schema::API_KEY_VERIFIERS;

/// What checks a client's scrambled answer for one secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Verifier {
    /// SHA1(SHA1(secret)), for `mysql_native_password`.
    native: [u8; 20],
    /// SHA256(SHA256(secret)), for `caching_sha2_password`.
    sha2: [u8; 32],
}

impl Verifier {
    /// The verifier of `secret`.
    pub(crate) fn of(secret: &str) -> Verifier {
        let native: [u8; 20] = Sha1::digest(Sha1::digest(secret.as_bytes())).into();
        let sha2: [u8; 32] = Sha256::digest(Sha256::digest(secret.as_bytes())).into();
        Verifier { native, sha2 }
    }

    /// Whether `answer` is the secret scrambled with `nonce`: by its length, a
    /// `mysql_native_password` answer (20 bytes) or a `caching_sha2_password` one (32). The
    /// comparison takes the same time wherever the bytes differ.
    pub(crate) fn accepts(&self, nonce: &[u8], answer: &[u8]) -> bool {
        match answer.len() {
            // answer = SHA1(secret) XOR SHA1(nonce || SHA1(SHA1(secret)))
            20 => {
                let mask = Sha1::new()
                    .chain_update(nonce)
                    .chain_update(self.native)
                    .finalize();
                let stage1: Vec<u8> = answer.iter().zip(mask).map(|(a, m)| a ^ m).collect();
                same(&Sha1::digest(&stage1), &self.native)
            }
            // answer = SHA256(secret) XOR SHA256(SHA256(SHA256(secret)) || nonce)
            32 => {
                let mask = Sha256::new()
                    .chain_update(self.sha2)
                    .chain_update(nonce)
                    .finalize();
                let stage1: Vec<u8> = answer.iter().zip(mask).map(|(a, m)| a ^ m).collect();
                same(&Sha256::digest(&stage1), &self.sha2)
            }
            _ => false,
        }
    }
}

/// Equal bytes, compared in full whatever differs first.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// Keeps the verifier of API key `key_id`.
pub(crate) fn keep_key(txn: &WriteTransaction, key_id: u64, key: &str) -> Result<()> {
    let verifier = serde_json::to_string(&Verifier::of(key))?;
    txn.open_table(API_KEY_VERIFIERS)?
        .insert(key_id, verifier.as_str())?;
    Ok(())
}

/// Forgets the verifier of API key `key_id`.
pub(crate) fn forget_key(txn: &WriteTransaction, key_id: u64) -> Result<()> {
    txn.open_table(API_KEY_VERIFIERS)?.remove(key_id)?;
    Ok(())
}

/// The verifier of API key `key_id`; `None` for a key made before verifiers were kept (a file
/// from an older build has no such table at all).
pub(crate) fn of_key(txn: &ReadTransaction, key_id: u64) -> Result<Option<Verifier>> {
    let table = match txn.open_table(API_KEY_VERIFIERS) {
        Ok(table) => table,
        Err(TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    match table.get(key_id)? {
        Some(text) => Ok(Some(serde_json::from_str(text.value())?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scrambles as PyMySQL computes them (`scramble_native_password`,
    /// `scramble_caching_sha2`), written out here.
    fn native(password: &str, nonce: &[u8]) -> Vec<u8> {
        let stage1 = Sha1::digest(password.as_bytes());
        let stage2 = Sha1::digest(stage1);
        let mask = Sha1::new()
            .chain_update(nonce)
            .chain_update(stage2)
            .finalize();
        stage1.iter().zip(mask).map(|(a, b)| a ^ b).collect()
    }

    fn sha2(password: &str, nonce: &[u8]) -> Vec<u8> {
        let p1 = Sha256::digest(password.as_bytes());
        let p2 = Sha256::digest(p1);
        let p3 = Sha256::new()
            .chain_update(p2)
            .chain_update(nonce)
            .finalize();
        p1.iter().zip(p3).map(|(a, b)| a ^ b).collect()
    }

    #[test]
    fn both_scrambles_of_the_right_secret_are_accepted_and_nothing_else() {
        let nonce = b"abcdefghij0123456789";
        let verifier = Verifier::of("s3cret");
        assert!(verifier.accepts(nonce, &native("s3cret", nonce)));
        assert!(verifier.accepts(nonce, &sha2("s3cret", nonce)));
        assert!(!verifier.accepts(nonce, &native("s3creT", nonce)));
        assert!(!verifier.accepts(nonce, &sha2("other", nonce)));
        // An answer to another nonce (a replay) is refused.
        assert!(!verifier.accepts(b"01234567890123456789", &native("s3cret", nonce)));
        assert!(!verifier.accepts(nonce, b""));
        assert!(!verifier.accepts(nonce, &[0u8; 21]));
        // The stored form survives a round trip.
        let kept: Verifier =
            serde_json::from_str(&serde_json::to_string(&verifier).unwrap()).unwrap();
        assert_eq!(kept, verifier);
    }
}
