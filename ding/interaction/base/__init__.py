"""Building blocks shared by Master and Slave."""

from .client import HttpClient
from .common import connectable_host, format_http_address, get_host_ip, random_token, split_http_address
from .envelope import ResponsibleException, failure_response, parse_json_object, success_response
from .limits import HttpLimits
