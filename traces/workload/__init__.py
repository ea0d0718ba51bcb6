"""The workload: a recording's clock, its arrival process (renewal, Markov-modulated
Poisson) and its joint input and output lengths, fitted to an archive, checked, and
sampled at any rate and length."""
