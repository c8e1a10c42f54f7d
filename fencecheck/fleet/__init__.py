"""Many runs: a TOML matrix of rows with expected outcomes (`matrix`), and a matrix split over
machines and merged back (`shard`)."""
