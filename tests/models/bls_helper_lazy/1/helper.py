WHO = "helper of bls_helper_lazy"
