"""The wire (the `upload` and `download` groups): how downloads and uploads are encoded, counted
in bytes and decoded."""
