from .main import main as main
