"""How the server combines client updates into one (mean now; median, trimmed mean, Krum later)."""
