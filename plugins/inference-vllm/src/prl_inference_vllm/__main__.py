"""``python -m prl_inference_vllm <resolved inference.json>``."""

import sys

from prl_inference_vllm.backend import main

sys.exit(main())
