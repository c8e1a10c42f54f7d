"""A plugin package as a third party would write one: a backend (service, descriptor), a Redis
lock client, a fault and a check, each with its options model where it has options."""
