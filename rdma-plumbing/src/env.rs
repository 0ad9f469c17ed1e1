//! The fabric a transport works on, from the environment the binary set up.
//!
//! The core names no wire: the binary (or a test rig) puts a [`fabric::Provider`] — real RDMA
//! devices or the in-process simulation — into the [`TransportEnv`], and each RDMA transport
//! opens it when it is created.

use fabric::{Fabric, Provider};
use target_core::registry::{TransportEnv, TransportError};

/// Opens the fabric provider of `env`.
pub fn open_fabric(env: &TransportEnv) -> Result<Fabric, TransportError> {
    let provider = env.get::<Provider>().cloned().ok_or_else(|| {
        TransportError::Fabric("no RDMA fabric provider was set up for the transports".into())
    })?;
    Fabric::open(provider)
        .map_err(|e| TransportError::Fabric(format!("cannot open the RDMA fabric: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric::SimNetwork;

    #[test]
    fn finds_the_provider_or_says_none_was_set_up() {
        let e = open_fabric(&TransportEnv::new()).unwrap_err();
        assert!(e.to_string().contains("no RDMA fabric provider"), "{e}");
        let env = TransportEnv::new().with(Provider::Sim(SimNetwork::new()));
        assert_eq!(open_fabric(&env).unwrap().name(), "sim");
    }
}
