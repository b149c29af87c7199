"""The long-running service: cameras added and removed at runtime, a live web view, events."""
