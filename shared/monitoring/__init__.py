"""What operators watch: Prometheus metrics shared by the processes (`metrics.py`: the multiprocess mode of forking
servers, their HTTP endpoint, the broker's queue depths)."""
