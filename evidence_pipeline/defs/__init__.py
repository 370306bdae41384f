"""The only Dagster code: partitions, resources, assets, checks, schedules and sensors over the domain modules."""
