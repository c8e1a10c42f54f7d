"""A plugin package as a third party would write one: a Redis lock client and a fault."""
