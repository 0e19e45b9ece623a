from .card import build_card as build_card
from .card import write_card as write_card
from .hub import PushResult as PushResult
from .hub import push_to_hub as push_to_hub
from .lock import build_lock as build_lock
from .lock import read_lock as read_lock
from .lock import write_lock as write_lock
