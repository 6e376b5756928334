"""A run's settings: the table (`table`), the resolved options (`options`), the resolver
(`resolver`), the device's defaults (`device_policy`) and a fine-tuned run's source
(`init_from`)."""
