"""The only Dagster code: partitions, resources, assets, schedules, sensors and the run coordinator."""
