"""What the admin and the pages (`playground/`) both put on screen: the playground form and
the forms that answer a ticket. Below both, so neither imports the other."""
