"""How much local work each client of a round does (`local_work`): the local epochs it trains."""
