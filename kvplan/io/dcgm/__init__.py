"""GPU evidence from NVIDIA's DCGM exporter: a saved ``/metrics`` scrape read as an nvidia-smi GPU snapshot.

:func:`read_dcgm_scrape` gives the frame :func:`kvplan.io.nvidia_smi_csv.read_nvidia_smi_csv` gives for a
``--query-gpu`` snapshot (:data:`~kvplan.io.nvidia_smi_csv.GPU_COLUMNS`, int bytes), so ``--nvidia-smi`` and
``--dcgm`` feed the same joins; :func:`read_gpu_snapshot` reads either kind. DCGM tells no per-process memory: other processes' memory stays unknown.
"""

from kvplan.io.dcgm.scrape import DCGM_FIELDS, is_dcgm_file, read_dcgm_scrape, read_gpu_snapshot

__all__ = ["DCGM_FIELDS", "is_dcgm_file", "read_dcgm_scrape", "read_gpu_snapshot"]
