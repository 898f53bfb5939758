import pytest
from django.contrib.auth import get_user_model

from streams.models import Project


@pytest.fixture
def user(db):
    return get_user_model().objects.create_user("ann")


@pytest.fixture
def project(user):
    return Project.personal(user)
