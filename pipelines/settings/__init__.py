"""A run's settings: the `table`, the resolved `options`, the `resolver`, the device's defaults
(`device_policy`) and a fine-tuned run's source (`init_from`)."""
