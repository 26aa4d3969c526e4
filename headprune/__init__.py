"""headprune: gate, score and prune attention heads (Michel, Levy and Neubig, 2019)."""
