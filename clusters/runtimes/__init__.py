"""Where nodes come from: this host behind an argv prefix (local), network namespaces (netns),
Docker containers (docker, with its node image and the host side in docker_host), SSH machines
(ssh, with each host's connection in ssh_remote)."""
