"""Built-in hardware catalog (YAML files), installed as planner.hardware_profiles."""
