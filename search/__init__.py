"""Search: templates, config spaces, measurement, tuners, tuning logs (being built)."""
