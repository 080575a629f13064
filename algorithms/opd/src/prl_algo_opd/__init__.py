"""prl algorithm plugin ``opd`` and the ref_kl token helpers opsd reuses."""

from prl_algo_opd.algorithm import OPD, distill, distilled, scored_logprobs

__all__ = ["OPD", "distill", "distilled", "scored_logprobs"]
