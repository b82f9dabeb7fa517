"""The published contracts, derived from the models: JSON Schemas for publishers
(:mod:`.schemas`), the AsyncAPI document of the topics (:mod:`.asyncapi`), and CloudEvents at
the HTTP edge (:mod:`.cloudevents`)."""
