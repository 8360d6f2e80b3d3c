"""The local demo: the synthesized pipeline in the emulator with SageMaker simulated by local training."""
