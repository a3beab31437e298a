"""torch.distributed inside one process group: data-parallel collectives (torchrun ranks or Ray learner ranks)
and FSDP2 sharding. Placement of roles on a Ray cluster is `rlvr.distributed`; this package never imports Ray."""
