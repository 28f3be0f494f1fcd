"""FedAvg with server momentum written against the Algorithm contract (docs/howto/)."""
