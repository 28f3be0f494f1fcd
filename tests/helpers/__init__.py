"""Code only tests call, kept out of fedlight: each helper is a function taking the object it
works on (a driver, a run's evaluation, an algorithm), doing by hand what a round does inside."""
