//! Validation of Services, Endpoints and EndpointSlices as the API server does it.
