"""Past one machine: sources spread over workers (Ray actors, or threads here), each running a
Pipeline; one coordinator commits every source's frames in order, once, across retries."""
