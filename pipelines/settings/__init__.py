"""A run's settings: the table (`table`), the resolved options (`options`), the resolver
(`resolver`) and the device's defaults (`device_policy`)."""
