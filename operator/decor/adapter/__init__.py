"""The Kubernetes adapter: the only code that imports the Kubernetes client."""
