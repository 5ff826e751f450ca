"""anvil_client: a typed Python client for anvild.

    import anvil_client, numpy as np
    c = anvil_client.Client("127.0.0.1:50051")
    job = c.submit({"name": "blobs", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 2})
    for event in c.watch(job.id): print(event.step, event.loss)
    print(c.predict("blobs", np.random.randn(3, 2).astype(np.float32)).top_k)
"""
from anvil_client.client import AnvilError, Client, Job, MetricEvent, Prediction

__all__ = ["AnvilError", "Client", "Job", "MetricEvent", "Prediction"]
__version__ = "0.1.0"
