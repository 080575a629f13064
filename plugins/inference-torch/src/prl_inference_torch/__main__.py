import sys

from prl_inference_torch.backend import main

sys.exit(main())
