"""Serving a model repository on a Ray cluster with Ray Serve (``modelyard serve --ray``).

Each model version is a Serve deployment whose replicas run the model with modelyard's own
core, backends and schedulers; modelyard's HTTP, gRPC and metrics frontends run as one async
actor per node and call the deployments through handles; BLS calls from a replica reach the
target's deployment wherever it runs. Every process keeps a mirror of the cluster's models in
its core's registry (remote versions whose scheduler forwards to the deployment), so
validation, error texts, ensembles, timeouts and cancellation are the core's own.

Modules: ``plan`` (config.pbtxt -> deployment options, pure), ``table`` (the cluster's model
table and its mirror in a core), ``remote`` (the scheduler that forwards to a deployment),
``router`` (sticky routing by correlation id), ``replica`` (the deployment class and its
ModelHost), ``controller`` (loads and unloads: deploy and delete), ``frontend`` (the per-node
frontends), ``stats`` (statistics and metrics across replicas), ``driver`` (the command).

Nothing here is imported by ``import modelyard``; only this package imports ``ray``.
"""
