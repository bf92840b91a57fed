WHO = "helper of bls_helper_b"
