"""The built-in task pool: one module per modality, built by ``build.build_pool``."""
