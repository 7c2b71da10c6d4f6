__version__ = "0.1.0"
# The name it gives itself where it reports: telemetry's component, the OTel service.
COMPONENT = "dsh-circuit-breaker"
