"""One generation driver, shared by `tcpc simulate` and `tcpc serve`.

- plan: the decode-first plan: each pipeline stage (pp = 1: the whole model) has its decode step
  compiled and checked against HBM at the cache's final length before its prefill is compiled
  beside it; serving takes its pieces for the KV budget and the iteration costs.
- decode: the decode loop, every step through the stages in turn (one stage: its own program),
  timed by the engine in blocks of consecutive lengths.
- figures: what a pipelined run reports per stage.

Stages are joined into one program by the target's recipes (`chain`), for simulate and serve alike.
"""
