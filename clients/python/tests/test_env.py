"""Launcher variables, endpoints and names (pure functions, no network)."""

import unittest

from sonde import _env


class Placement(unittest.TestCase):
    def test_torchrun_variables(self):
        p = _env.placement({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"})
        self.assertEqual((p.rank, p.local_rank, p.world_size), (3, 1, 4))

    def test_open_mpi_then_slurm(self):
        p = _env.placement({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_SIZE": "3"})
        self.assertEqual((p.rank, p.local_rank, p.world_size), (2, 0, 3))
        p = _env.placement({"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8"})
        self.assertEqual((p.rank, p.local_rank, p.world_size), (5, 1, 8))

    def test_torchrun_wins_over_slurm_and_arguments_win_over_all(self):
        env = {"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "7", "SLURM_NTASKS": "8"}
        self.assertEqual(_env.placement(env).rank, 1)
        self.assertEqual(_env.placement(env, rank=0).rank, 0)

    def test_no_launcher_is_a_single_process(self):
        p = _env.placement({})
        self.assertEqual((p.rank, p.local_rank, p.world_size), (0, 0, 1))

    def test_bad_values_name_the_variable(self):
        with self.assertRaisesRegex(ValueError, "RANK='x'"):
            _env.placement({"RANK": "x"})
        with self.assertRaisesRegex(ValueError, "negative"):
            _env.placement({"SLURM_PROCID": "-1"})
        with self.assertRaisesRegex(ValueError, "not below world_size"):
            _env.placement({"RANK": "2", "WORLD_SIZE": "2"})


class Endpoints(unittest.TestCase):
    def test_defaults_follow_the_protocol(self):
        self.assertEqual(_env.endpoint({}, None, "http/protobuf"), "http://127.0.0.1:4318")
        self.assertEqual(_env.endpoint({}, None, "grpc"), "http://127.0.0.1:4317")

    def test_environment_then_argument(self):
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://sonde:4318/"}
        self.assertEqual(_env.endpoint(env), "http://sonde:4318")
        self.assertEqual(_env.endpoint(env, "http://other:1"), "http://other:1")

    def test_bad_endpoint_and_protocol(self):
        with self.assertRaisesRegex(ValueError, "http://"):
            _env.endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "sonde:4318"})
        with self.assertRaisesRegex(ValueError, "grpc or http/protobuf"):
            _env.protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})

    def test_job_name_sources(self):
        self.assertEqual(_env.job_name({"SONDE_CLIENT_JOB": "mnist"}), "mnist")
        self.assertEqual(_env.job_name({"OTEL_SERVICE_NAME": "svc"}), "svc")
        self.assertEqual(_env.job_name({}, "/x/train.py"), "train")
        self.assertEqual(_env.job_name({}, "-c"), "python-job")


if __name__ == "__main__":
    unittest.main()
