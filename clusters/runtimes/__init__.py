"""Where nodes come from: this host behind an argv prefix (local), network namespaces (netns),
Docker containers (docker, with its node image), SSH machines (ssh)."""
