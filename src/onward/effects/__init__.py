"""Side effects done once: the protocol, the effect ledger, compensation."""
