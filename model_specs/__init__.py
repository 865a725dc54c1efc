"""Built-in model catalog (YAML files), installed as planner.model_specs."""
