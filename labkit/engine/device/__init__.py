"""The devices the mini engine runs on, behind one interface: simulated (``devices``) and real (``torch_device``)."""
