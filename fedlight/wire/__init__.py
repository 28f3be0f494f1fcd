"""The wire (`wire=`): how downloads and uploads are encoded, counted in bytes and decoded."""
