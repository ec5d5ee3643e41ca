"""Fleets: budgets per host class from many hosts' startup logs, read on Dask from disk or object storage
(the ``fleet`` extra: dask[distributed], fsspec, s3fs; ``import kvplan`` does not import it)."""

from kvplan.fleet.classes import FleetPolicy
from kvplan.fleet.inputs import FleetInputError, list_fleet, parse_storage_options
from kvplan.fleet.planner import FleetPlan, plan_fleet, plan_readings
from kvplan.fleet.read import read_fleet

__all__ = ["FleetInputError", "FleetPlan", "FleetPolicy", "list_fleet", "parse_storage_options", "plan_fleet"]
__all__ += ["plan_readings", "read_fleet"]
