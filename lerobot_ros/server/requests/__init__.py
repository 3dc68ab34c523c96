"""A request's way from a deposited observation to a published chunk: the scheduler, the stages and
the workers that run them."""
