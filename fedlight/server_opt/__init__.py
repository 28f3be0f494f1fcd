"""Server optimizers (`server_opt=`): how the server applies the aggregated pseudo-gradient."""
