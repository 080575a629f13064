"""prl-trainer-torch: the PyTorch trainer of prl (FSDP2 SFT, DCP checkpoints, HF export)."""
