//! The DH-HMAC-CHAP computations (base spec §8.13.5.4–5): augmented challenge and responses.
//!
//! With `Kh'`/`Kc'` the transformed host/controller keys ([`DhchapSecret::transform`] with the
//! host/subsystem NQN), `Ca` the challenge, `S` the sequence number, `T` the transaction id and
//! `H` the negotiated hash:
//!
//! ```text
//! augmented challenge  Ca' = HMAC_H(H(g^xy mod p), Ca)            (DH group not null; else Ca)
//! host response        R1  = HMAC_H(Kh', Ca' || le32(S1) || le16(T) || SC_C=0 || "HostHost"
//!                                      || NQNh || 00h || NQNc)
//! controller response  R2  = HMAC_H(Kc', Ca2' || le32(S2) || le16(T) || SC_C=0 || "Controller"
//!                                      || NQNc || 00h || NQNh)
//! ```
//!
//! (the kernel's `nvme_auth_augmented_challenge`, `nvmet_auth_host_hash`/`nvmet_auth_ctrl_hash`,
//! SPDK's `spdk_nvme_dhchap_calculate`). The negotiated hash is independent of the secret's
//! transformation hash.

use super::hash::{Buf64, Digest};
use super::secret::DhchapSecret;

/// `HMAC_H(H(shared), challenge)`: the challenge actually used when a DH group is in use.
pub fn augmented_challenge(digest: Digest, shared: &[u8], challenge: &[u8]) -> Buf64 {
    let hashed = digest.hash(shared);
    digest.hmac(hashed.as_bytes(), &[challenge])
}

/// Which side a response authenticates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The host's response R1 ("HostHost", host NQN first, key transformed with the host NQN).
    Host,
    /// The controller's response R2 ("Controller", subsystem NQN first).
    Controller,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::Host => b"HostHost",
            Role::Controller => b"Controller",
        }
    }
}

/// The inputs of one response computation.
#[derive(Clone, Copy, Debug)]
pub struct ResponseInput<'a> {
    /// The negotiated hash.
    pub digest: Digest,
    /// Host or controller response.
    pub role: Role,
    /// The challenge (C1 for the host response, C2 for the controller's), not augmented.
    pub challenge: &'a [u8],
    /// The DH shared secret, if a DH group is in use.
    pub shared: Option<&'a [u8]>,
    /// The sequence number sent with the challenge (S1 or S2).
    pub seqnum: u32,
    /// The transaction id.
    pub tid: u16,
    /// The host NQN.
    pub hostnqn: &'a str,
    /// The subsystem NQN.
    pub subnqn: &'a str,
}

/// The response value for `input` with `secret` (the host's key for [`Role::Host`], the
/// controller key for [`Role::Controller`]).
pub fn response(secret: &DhchapSecret, input: &ResponseInput<'_>) -> Buf64 {
    let (first, second) = match input.role {
        Role::Host => (input.hostnqn, input.subnqn),
        Role::Controller => (input.subnqn, input.hostnqn),
    };
    let key = secret.transform(first);
    let augmented;
    let challenge = match input.shared {
        Some(s) => {
            augmented = augmented_challenge(input.digest, s, input.challenge);
            augmented.as_bytes()
        }
        None => input.challenge,
    };
    input.digest.hmac(
        key.as_bytes(),
        &[
            challenge,
            &input.seqnum.to_le_bytes(),
            &input.tid.to_le_bytes(),
            &[0], // SC_C: no secure channel concatenation
            input.role.label(),
            first.as_bytes(),
            &[0],
            second.as_bytes(),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(role: Role, shared: Option<&'a [u8]>) -> ResponseInput<'a> {
        ResponseInput {
            digest: Digest::Sha256,
            role,
            challenge: &[0x11; 32],
            shared,
            seqnum: 7,
            tid: 3,
            hostnqn: "nqn.host",
            subnqn: "nqn.subsys",
        }
    }

    #[test]
    fn every_input_changes_the_response() {
        let key = DhchapSecret::from_key(None, &[9; 32]).unwrap();
        let base = response(&key, &input(Role::Host, None));
        assert_eq!(base.len(), 32);
        let variants = [
            input(Role::Controller, None),
            input(Role::Host, Some(&[1, 2, 3])),
            ResponseInput {
                digest: Digest::Sha512,
                ..input(Role::Host, None)
            },
            ResponseInput {
                seqnum: 8,
                ..input(Role::Host, None)
            },
            ResponseInput {
                tid: 4,
                ..input(Role::Host, None)
            },
            ResponseInput {
                hostnqn: "nqn.other",
                ..input(Role::Host, None)
            },
            ResponseInput {
                challenge: &[0x12; 32],
                ..input(Role::Host, None)
            },
        ];
        for v in variants {
            assert_ne!(response(&key, &v).as_bytes(), base.as_bytes(), "{v:?}");
        }
        let other = DhchapSecret::from_key(None, &[8; 32]).unwrap();
        assert_ne!(
            response(&other, &input(Role::Host, None)).as_bytes(),
            base.as_bytes()
        );
    }

    #[test]
    fn augmented_challenge_is_hmac_of_hashed_secret() {
        let d = Digest::Sha384;
        let a = augmented_challenge(d, b"secret", &[5; 48]);
        let expect = d.hmac(d.hash(b"secret").as_bytes(), &[&[5; 48]]);
        assert_eq!(a.as_bytes(), expect.as_bytes());
        assert_eq!(a.len(), 48);
    }
}
