"""Many runs: a TOML matrix of rows with expected outcomes (`matrix`: the rows and their
loading; `runs`: running them, each in a child process; `outputs`: the comparison, JUnit and
matrix.json), and a matrix split over machines and merged back (`shard`)."""
