"""The execution cluster: django-q2 wake-ups, the in-process executor driver, the sweeper."""
