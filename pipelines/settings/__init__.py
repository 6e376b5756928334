"""A run's settings: the one table (`table`), the recipes tasks and presets bring
(`recipes`), the resolved options (`options`), the resolver (`resolve`) and the device's
defaults (`device_policy`)."""
